"""deploy/: what an admin applies, checked the way it will be used.

- deploy/kubernetes: every manifest against the Kubernetes API's schema,
  offline, with kubernetes-validate (--strict: an unknown or misspelt field
  fails), then what the schema cannot see: the DaemonSet's mount, probe,
  hook and metrics port agree with each other and the training pod mounts
  what the DaemonSet shares.
- deploy/prometheus: `promtool check rules`, `check config` and `test rules`
  (the unit tests fire every alert from synthetic series, and the two
  scenarios fire only the alerts they name).
- deploy/grafana: the dashboard's structure, its queries parsed by promtool.
- Every metric and label the rules and the dashboard name, against the
  /metrics file of a real mount.
- deploy/slurm: the prolog and epilog against a real mount.

Runs in the test venv (kubernetes-validate, PyYAML); promtool from Debian's
prometheus package (scripts/setup.sh).
"""

import glob
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import yaml

from harness import DatasetMixin, JoaderTestCase

HERE = os.path.dirname(os.path.abspath(__file__))
DEPLOY = os.environ.get("JOADERFS_DEPLOY_DIR",
                        os.path.join(HERE, "..", "..", "deploy"))
KUBERNETES = os.path.join(DEPLOY, "kubernetes")
RULES = os.path.join(DEPLOY, "prometheus", "joaderfs-rules.yaml")
RULES_TEST = os.path.join(DEPLOY, "prometheus", "joaderfs-rules.test.yaml")
PROMETHEUS_CONFIG = os.path.join(DEPLOY, "prometheus", "prometheus.yml")
DASHBOARD = os.path.join(DEPLOY, "grafana", "joaderfs.json")
PROLOG = os.path.join(DEPLOY, "slurm", "prolog.sh")
EPILOG = os.path.join(DEPLOY, "slurm", "epilog.sh")

# The oldest Kubernetes the manifests are meant for.
KUBERNETES_VERSION = "1.30.0"

# Series names in PromQL: the daemon's families and the process_* ones it
# serves beside them. (`up` is Prometheus' own, label names and functions
# never start so.)
METRIC_NAME = re.compile(r"\b(?:joaderfs|process)_[a-zA-Z0-9_]*\b")
# Labels that Prometheus adds to every scraped series.
TARGET_LABELS = {"instance", "job"}


def run(argv, **kwargs):
    return subprocess.run(argv, capture_output=True, text=True, timeout=120,
                          **kwargs)


def promtool():
    path = shutil.which("promtool")
    if path is None:
        raise AssertionError("no promtool: install Debian's prometheus "
                             "package (scripts/setup.sh)")
    return path


def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def rules():
    with open(RULES) as f:
        return [r for g in yaml.safe_load(f)["groups"] for r in g["rules"]]


def dashboard():
    with open(DASHBOARD) as f:
        return json.load(f)


def dashboard_targets(dash):
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            yield panel, target


def dashboard_queries(dash):
    """Every PromQL text of the dashboard: panel targets and the template
    variables' label_values() queries."""
    out = [t["expr"] for _, t in dashboard_targets(dash)]
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            out.append(var["definition"])
    return out


def metric_names(texts):
    return {name for text in texts for name in METRIC_NAME.findall(text)}


def served_families(text):
    """{family name: type} from the # TYPE lines of a /metrics file. The
    text format names a counter's family with its _total, as its samples."""
    families = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            families[name] = kind
    return families


def served_labels(text):
    return set(re.findall(r'[{,]([a-zA-Z_][a-zA-Z0-9_]*)="', text))


class KubernetesManifestsTest(unittest.TestCase):

    def setUp(self):
        self.files = sorted(glob.glob(os.path.join(KUBERNETES, "*.yaml")))
        self.assertTrue(self.files, "no manifests in " + KUBERNETES)
        self.docs = [d for f in self.files for d in load_all(f)]
        self.by_kind = {}
        for d in self.docs:
            self.by_kind.setdefault(d["kind"], []).append(d)

    def test_schema(self):
        try:
            import kubernetes_validate  # noqa: F401
        except ImportError:
            self.fail("no kubernetes_validate in %s: pip install -r "
                      "python/requirements-test.txt" % sys.executable)
        r = run([sys.executable, "-m", "kubernetes_validate", "--strict",
                 "-k", KUBERNETES_VERSION] + self.files)
        out = r.stdout + r.stderr
        self.assertEqual(r.returncode, 0, out)
        # One "passed" line per resource: none skipped for a missing schema.
        self.assertEqual(out.count(" passed for resource "), len(self.docs), out)

    def test_daemonset(self):
        (ds,) = self.by_kind["DaemonSet"]
        pod = ds["spec"]["template"]
        spec = pod["spec"]
        for host in ("hostNetwork", "hostPID", "hostIPC"):
            self.assertFalse(spec.get(host, False), host)
        self.assertIn("terminationGracePeriodSeconds", spec)
        volumes = {v["name"]: v for v in spec["volumes"]}
        for v in volumes.values():
            # The schema takes any string for a hostPath's type.
            if "hostPath" in v:
                self.assertIn(v["hostPath"].get("type", ""), {
                    "", "DirectoryOrCreate", "Directory", "FileOrCreate", "File",
                    "Socket", "CharDevice", "BlockDevice"}, v)
        (c,) = spec["containers"]
        self.assertTrue(c["command"][0].endswith("/joaderfs"), c["command"])
        args = c["args"]
        self.assertEqual(args[0], "-f", "the daemon must stay in the foreground")
        options = dict(o.partition("=")[::2] for o in args[args.index("-o") + 1].split(","))
        mountpoint = args[-1]
        mounts = {m["mountPath"]: m for m in c["volumeMounts"]}

        # /dev/fuse from the host.
        self.assertEqual(volumes[mounts["/dev/fuse"]["name"]]["hostPath"],
                         {"path": "/dev/fuse", "type": "CharDevice"})
        # The mountpoint lies below a Bidirectional hostPath mount, which
        # only a privileged container may have.
        shared = [m for m in c["volumeMounts"]
                  if m.get("mountPropagation") == "Bidirectional"]
        self.assertEqual(len(shared), 1, shared)
        self.assertTrue(mountpoint.startswith(shared[0]["mountPath"].rstrip("/") + "/"),
                        (mountpoint, shared[0]))
        self.assertIn("hostPath", volumes[shared[0]["name"]])
        sc = c["securityContext"]
        self.assertTrue(sc.get("privileged"), "Bidirectional needs privileged")
        self.assertNotEqual(sc.get("allowPrivilegeEscalation"), False,
                            "the API server refuses it with privileged")
        self.assertTrue(sc.get("readOnlyRootFilesystem"))
        # cache_dir on a hostPath, the allow_other the training pods need.
        self.assertIn("allow_other", options)
        self.assertIn("hostPath", volumes[mounts[options["cache_dir"]]["name"]])
        # metrics_listen on the pod's IP, at the port named metrics, which
        # the scrape annotations name too.
        env = {e["name"]: e for e in c["env"]}
        self.assertEqual(env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"], "status.podIP")
        host, _, port = options["metrics_listen"].rpartition(":")
        self.assertEqual(host, "$(POD_IP)")
        ports = {p["name"]: p for p in c["ports"]}
        self.assertEqual(ports["metrics"]["containerPort"], int(port))
        annotations = pod["metadata"]["annotations"]
        self.assertEqual(annotations["prometheus.io/scrape"], "true")
        self.assertEqual(annotations["prometheus.io/port"], port)
        self.assertEqual(annotations["prometheus.io/path"], "/metrics")
        # Ready when the mount serves /stats; unmounted before SIGTERM.
        self.assertEqual(c["readinessProbe"]["exec"]["command"],
                         ["cat", mountpoint + "/stats"])
        self.assertEqual(c["lifecycle"]["preStop"]["exec"]["command"],
                         ["fusermount3", "-u", mountpoint])
        # Memory: a limit (the daemon's default ram_cache is a quarter of
        # it), and an explicit ram_cache within that quarter.
        limit = c["resources"]["limits"]["memory"]
        self.assertEqual(c["resources"]["requests"]["memory"], limit)
        if "ram_cache" in options:
            self.assertLessEqual(bytes_of(options["ram_cache"]), bytes_of(limit) // 4)

    def test_training_pod_sees_the_mount(self):
        (ds,) = self.by_kind["DaemonSet"]
        dspec = ds["spec"]["template"]["spec"]
        (c,) = dspec["containers"]
        mountpoint = c["args"][-1]
        (shared,) = [m for m in c["volumeMounts"]
                     if m.get("mountPropagation") == "Bidirectional"]
        (host_dir,) = [v["hostPath"]["path"] for v in dspec["volumes"]
                       if v["name"] == shared["name"]]
        (pod,) = self.by_kind["Pod"]
        spec = pod["spec"]
        volumes = {v["name"]: v for v in spec["volumes"]}
        (train,) = spec["containers"]
        (m,) = [m for m in train["volumeMounts"]
                if m.get("mountPropagation") == "HostToContainer"]
        self.assertEqual(volumes[m["name"]]["hostPath"]["path"], host_dir)
        self.assertFalse(m.get("readOnly", False), "the pod makes its job folder")
        # The same path inside both containers: the pod's MOUNT is the mount.
        self.assertEqual(m["mountPath"], shared["mountPath"])
        env = {e["name"]: e for e in train["env"]}
        self.assertEqual(env["MOUNT"]["value"], mountpoint)
        script = " ".join(train["command"] + train["args"])
        self.assertIn('mkdir "$job"', script)
        self.assertIn('job="$MOUNT/jobs/$POD_NAME"', script)
        self.assertEqual(env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"], "metadata.name")
        self.assertTrue(spec["securityContext"].get("runAsNonRoot"))


def bytes_of(quantity):
    """A Kubernetes quantity or a joaderfs SIZE (8G, 32Gi, 512M) in bytes,
    binary multiples for both."""
    m = re.fullmatch(r"(\d+)([KMGT]i?)?", str(quantity))
    assert m, quantity
    return int(m.group(1)) << (10 * " KMGT".index((m.group(2) or " ")[0]))


class PrometheusRulesTest(unittest.TestCase):

    def test_check_rules(self):
        r = run([promtool(), "check", "rules", RULES])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_check_config(self):
        r = run([promtool(), "check", "config", PROMETHEUS_CONFIG])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_unit_tests(self):
        r = run([promtool(), "test", "rules", RULES_TEST])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("SUCCESS", r.stdout)

    def test_every_alert_fires_in_the_unit_tests(self):
        with open(RULES_TEST) as f:
            tests = yaml.safe_load(f)["tests"]
        fired, quiet = set(), set()
        for t in tests:
            for a in t["alert_rule_test"]:
                (fired if a.get("exp_alerts") else quiet).add(a["alertname"])
        alerts = [r for r in rules() if "alert" in r]
        names = {r["alert"] for r in alerts}
        self.assertEqual(names - fired, set(), "alerts no unit test fires")
        self.assertEqual(names - quiet, set(), "alerts no unit test keeps quiet")
        self.assertEqual((fired | quiet) - names, set(), "tests of no alert")
        # The first scenario: memory over budget, forged remote values.
        for name in ("JoaderfsMemoryOverBudget", "JoaderfsRemoteValuesRejected"):
            self.assertIn(name, fired)
        for r in alerts:
            self.assertTrue(r["annotations"].get("summary"), r["alert"])
            self.assertTrue(r["annotations"].get("description"), r["alert"])
            self.assertIn(r["labels"].get("severity"), {"critical", "warning", "info"}, r)


class GrafanaDashboardTest(unittest.TestCase):

    def test_structure(self):
        dash = dashboard()
        self.assertGreaterEqual(dash["schemaVersion"], 36)
        variables = {v["name"]: v for v in dash["templating"]["list"]}
        ds = variables["datasource"]
        self.assertEqual((ds["type"], ds["query"]), ("datasource", "prometheus"))
        ids = [p["id"] for p in dash["panels"]]
        self.assertEqual(len(ids), len(set(ids)), "panel ids repeat")
        titles = {p["title"] for p in dash["panels"]}
        for wanted in ("Samples/s per job", "Stall seconds per second, per job",
                       "Hit rates", "Decode busy fraction",
                       "Resident memory and RAM budget",
                       "Remote tier: rejected values and errors"):
            self.assertIn(wanted, titles)
        targets = list(dashboard_targets(dash))
        self.assertTrue(targets)
        for panel, t in targets:
            # Every query goes to the data source the variable picks.
            self.assertEqual(panel["datasource"]["uid"], "${datasource}", panel["title"])
            self.assertEqual(t["datasource"]["uid"], "${datasource}", panel["title"])
        for var in variables.values():
            if var["type"] == "query":
                self.assertEqual(var["datasource"]["uid"], "${datasource}", var["name"])

    def test_queries_parse(self):
        """promtool parses each query as a recording rule's expression, with
        the dashboard's variables given values."""
        dash = dashboard()
        exprs = [t["expr"] for _, t in dashboard_targets(dash)]
        subst = {"$__rate_interval": "5m", "$instance": ".*", "$mount": ".*"}
        group = []
        for i, e in enumerate(exprs):
            for k, v in subst.items():
                e = e.replace(k, v)
            self.assertNotIn("$", e, "a variable the test does not know: " + e)
            group.append({"record": "dashboard:query_%d" % i, "expr": e})
        d = tempfile.mkdtemp(prefix="joaderfs-deploy-")
        self.addCleanup(shutil.rmtree, d, True)
        path = os.path.join(d, "queries.yaml")
        with open(path, "w") as f:
            yaml.safe_dump({"groups": [{"name": "dashboard", "rules": group}]}, f)
        r = run([promtool(), "check", "rules", path])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # label_values(METRIC{...}, LABEL) of the variables.
        for var in dash["templating"]["list"]:
            if var["type"] == "query":
                self.assertRegex(var["definition"], r"^label_values\(\w+(\{[^}]*\})?, \w+\)$")


class ServedMetricsTest(DatasetMixin, JoaderTestCase):
    """The names the rules and the dashboard use, against /metrics of a
    real mount with a job (per-job families carry its labels)."""

    def test_rules_and_dashboard_use_served_metrics(self):
        m = self.mount(self.source)
        m.mkjob("deploy-check")
        m.mkjob("deploy-ranked", spec="ranks=2")  # the rank label
        text = m.read_text("metrics")
        families = served_families(text)
        self.assertIn("joaderfs_build_info", families)
        self.assertIn("joaderfs_job_stall_seconds_total", families)
        labels = served_labels(text) | TARGET_LABELS

        rule_exprs = [r["expr"] for r in rules()]
        used = {"rules": metric_names(rule_exprs),
                "dashboard": metric_names(dashboard_queries(dashboard()))}
        for where, names in used.items():
            # Enough names found that the pattern is known to work.
            self.assertGreater(len(names), 5, (where, names))
            self.assertEqual(names - set(families), set(),
                             "%s name series the daemon does not serve" % where)
        self.assertIn("process_resident_memory_bytes", used["rules"])
        # A counter is used through rate()/increase(), a gauge as it is.
        for text_ in rule_exprs + dashboard_queries(dashboard()):
            for name in METRIC_NAME.findall(text_):
                if families[name] == "counter":
                    self.assertRegex(text_, r"(rate|increase)\(%s\b" % name, text_)

        # Labels in the rules' templates and the dashboard's legends.
        named = set()
        for r in rules():
            for v in r.get("annotations", {}).values():
                named |= set(re.findall(r"\$labels\.(\w+)", v))
        for _, t in dashboard_targets(dashboard()):
            named |= set(re.findall(r"\{\{\s*(\w+)\s*\}\}", t.get("legendFormat", "")))
        for e in rule_exprs + dashboard_queries(dashboard()):
            for group in re.findall(r"\bby\s*\(([^)]*)\)", e):
                named |= {x.strip() for x in group.split(",") if x.strip()}
        self.assertIn("mount", named)
        self.assertEqual(named - labels, set(), "labels the daemon does not serve")


    def test_training_pod_spec_is_accepted(self):
        """The spec training-pod.yaml writes, written to a real mount."""
        (pod,) = [d for f in sorted(glob.glob(os.path.join(KUBERNETES, "*.yaml")))
                  for d in load_all(f) if d["kind"] == "Pod"]
        (train,) = pod["spec"]["containers"]
        text = {e["name"]: e.get("value") for e in train["env"]}["SPEC"]
        m = self.mount(self.source)
        m.mkjob("training-pod", spec=text + "\n")  # EINVAL would raise
        spec = m.read_spec("training-pod")
        for pair in text.split():
            key, _, value = pair.partition("=")
            self.assertEqual(spec[key], value, spec)


class SlurmScriptsTest(DatasetMixin, JoaderTestCase):
    """deploy/slurm against a real mount (allow_other, as a shared node
    mounts it), run as slurmd runs them."""

    def setUp(self):
        self.m = self.mount(self.source, {"allow_other": None})
        os.chmod(self.m.workdir, 0o755)  # the job's user reaches the mountpoint

    def slurm(self, script, job_id, user, as_uid=None, **env):
        e = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "JOADERFS_"))}
        e.update({"SLURM_JOB_ID": str(job_id), "SLURM_JOB_USER": user.pw_name,
                  "JOADERFS_MOUNT": self.m.mnt})
        e.update(env)
        argv = [script]
        if as_uid is not None and as_uid != os.getuid():
            argv = ["setpriv", "--reuid=%d" % as_uid, "--regid=%d" % as_uid,
                    "--clear-groups", "--"] + argv
        return run(argv, env=e)

    def job_dir(self, job_id):
        return os.path.join(self.m.mnt, "jobs", "slurm-%d" % job_id)

    def user(self):
        """The job's user: nobody when root runs the test (root's Prolog
        makes another user's job), else the caller."""
        if os.geteuid() == 0:
            return pwd.getpwnam("nobody")
        return pwd.getpwuid(os.getuid())

    def test_prolog_and_epilog(self):
        """slurm.conf Prolog= and Epilog=: slurmd runs both as root."""
        if os.geteuid() != 0:
            self.skipTest("slurmd's Prolog runs as root")
        user = self.user()
        job = self.job_dir(4242)
        r = self.slurm(PROLOG, 4242, user, JOADERFS_SPEC="subset=random:0.5:7 seed=3")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("export JOADERFS_JOB=" + job, r.stdout)
        st = os.stat(job)
        self.assertEqual(st.st_uid, user.pw_uid, "the job must be its user's")
        spec = self.m.read_spec("slurm-4242")
        self.assertEqual((spec["subset"], spec["seed"]), ("random:0.5:7", "3"), spec)
        self.assertEqual(self.m.status("slurm-4242")["owner"], user.pw_uid)
        # Its user reads the stream (a job is its maker's: root's would
        # refuse them).
        r = run(["setpriv", "--reuid=%d" % user.pw_uid, "--regid=%d" % user.pw_gid,
                 "--clear-groups", "--", "head", "-c", "64", job + "/next"])
        self.assertEqual(r.returncode, 0, r.stderr)
        # The prolog again (a requeue, a second node's run): fine.
        r = self.slurm(PROLOG, 4242, user, JOADERFS_SPEC="subset=random:0.5:7 seed=3")
        self.assertEqual(r.returncode, 0, r.stderr)

        r = self.slurm(EPILOG, 4242, user)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertFalse(os.path.exists(job))
        self.assertNotIn("slurm-4242", os.listdir(self.m.path("jobs")))
        # Twice is harmless: ENOENT is no error.
        r = self.slurm(EPILOG, 4242, user)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_task_prolog_as_the_user(self):
        """slurm.conf TaskProlog=: each task runs it as the job's user,
        with the job's environment (JOADERFS_SPEC)."""
        user = self.user()
        job = self.job_dir(77)
        for task in range(2):  # two tasks of one node
            r = self.slurm(PROLOG, 77, user, as_uid=user.pw_uid,
                           JOADERFS_SPEC="seed=5")
            self.assertEqual(r.returncode, 0, "task %d: %s" % (task, r.stderr))
            self.assertIn("export JOADERFS_JOB=" + job, r.stdout)
        self.assertEqual(os.stat(job).st_uid, user.pw_uid)
        self.assertEqual(self.m.read_spec("slurm-77")["seed"], "5")
        # A spec the daemon refuses fails the prolog, saying why.
        r = self.slurm(PROLOG, 78, user, as_uid=user.pw_uid, JOADERFS_SPEC="size=abc")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("size=abc", r.stderr)
        for job_id in (77, 78):
            r = self.slurm(EPILOG, job_id, user)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertFalse(os.path.exists(self.job_dir(job_id)))

    def test_refusals(self):
        user = self.user()
        # Another user's folder of the same name is not taken over.
        if os.geteuid() == 0 and user.pw_uid != 0:
            os.mkdir(self.job_dir(5))
            r = self.slurm(PROLOG, 5, user)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("belongs to uid 0", r.stderr)
            r = self.slurm(EPILOG, 5, user)
            self.assertEqual(r.returncode, 0, r.stderr)
        # No mount: the prolog fails (Slurm drains the node) unless
        # JOADERFS_OPTIONAL=1; the epilog has nothing to remove.
        empty = self.tempdir()
        r = self.slurm(PROLOG, 6, user, as_uid=user.pw_uid, JOADERFS_MOUNT=empty)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("not a joaderfs mount", r.stderr)
        r = self.slurm(PROLOG, 6, user, as_uid=user.pw_uid, JOADERFS_MOUNT=empty,
                       JOADERFS_OPTIONAL="1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(os.listdir(empty), [])
        r = self.slurm(EPILOG, 6, user, JOADERFS_MOUNT=empty)
        self.assertEqual(r.returncode, 0, r.stderr)


if __name__ == "__main__":
    unittest.main()
