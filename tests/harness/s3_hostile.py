"""A hostile or broken S3 endpoint on loopback, for the tests of what an
s3:// SOURCE must survive: answers that never end, listings that loop,
keys no real bucket would hold. Pure standard library (no moto): it checks
no signature, but records the access key id each request was signed with.

HostileS3() serves one bucket from a dict of objects, answering
ListObjectsV2 (pages of `page_size` keys, `encoding-type=url` honoured as
S3 does: keys percent-encoded, EncodingType in the answer), GET (ranges
too) and HEAD. What it does wrong is chosen per test:

  .listed_extra        [(key, size)]: listed (in key order with the rest,
                       whatever the prefix) but never served
  .loop_token = True   every truncated page hands back the same token
                       and the same keys: a listing that never ends
  .list_endless_error  listings answer 503 with an error body that never
                       ends
  .endless_error[key]  GETs of `key` answer 500 with an error body that
                       never ends (chunked, until the client hangs up)
  .endless_ok[key]     GETs of `key` answer 200 with a body that never ends
                       (chunked, no Content-Length)
  .trickle[key]        GETs of `key` answer 200 with its Content-Length,
                       then one byte a second

.requests counts requests by kind ("list", "get", "head"); .access_keys
the access key ids seen in Authorization headers; .body_bytes the body
bytes sent per key. Call stop().
"""

import hashlib
import http.server
import socketserver
import threading
import time
import urllib.parse
from xml.sax.saxutils import escape

# An endless body stops here whatever the client does, so that a client
# that never hangs up cannot keep the test machine busy for good.
SAFETY_LIMIT = 8 << 30
CHUNK = 64 << 10


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def etag_of(data):
    return hashlib.md5(data).hexdigest()


class HostileS3:
    def __init__(self, bucket="data", page_size=1000):
        self.bucket = bucket
        self.page_size = page_size
        self.objects = {}
        self.listed_extra = []
        self.loop_token = False
        self.list_endless_error = False
        self.endless_error = set()
        self.endless_ok = set()
        self.trickle = set()
        self.lock = threading.Lock()
        self.requests = {"list": 0, "get": 0, "head": 0}
        self.access_keys = set()
        self.body_bytes = {}
        s3 = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _key(self):
                url = urllib.parse.urlsplit(self.path)
                parts = url.path.lstrip("/").split("/", 1)
                key = urllib.parse.unquote(parts[1]) if len(parts) > 1 else ""
                return parts[0], key, urllib.parse.parse_qs(url.query, keep_blank_values=True)

            def _note(self, kind):
                auth = self.headers.get("Authorization") or ""
                with s3.lock:
                    s3.requests[kind] += 1
                    if "Credential=" in auth:
                        s3.access_keys.add(auth.split("Credential=", 1)[1].split("/", 1)[0])

            def _send(self, code, body, headers=()):
                self.send_response(code)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _count(self, key, n):
                with s3.lock:
                    s3.body_bytes[key] = s3.body_bytes.get(key, 0) + n

            def _endless(self, key, code, unit):
                """A chunked body of `unit` repeated until the client goes."""
                self.send_response(code)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                chunk = (unit * (CHUNK // len(unit) + 1))[:CHUNK]
                framed = b"%x\r\n%s\r\n" % (len(chunk), chunk)
                sent = 0
                try:
                    while sent < SAFETY_LIMIT:
                        self.wfile.write(framed)
                        sent += len(chunk)
                        self._count(key, len(chunk))
                except OSError:
                    pass
                self.close_connection = True

            def do_HEAD(self):
                self._note("head")
                _, key, _ = self._key()
                data = s3.objects.get(key)
                if data is None:
                    self._send(404, b"")
                    return
                self._send(200, data, [("ETag", '"%s"' % etag_of(data))])

            def do_GET(self):
                bucket, key, query = self._key()
                if bucket != s3.bucket:
                    self._note("get")
                    self._send(404, b"<Error><Code>NoSuchBucket</Code></Error>")
                    return
                if not key:
                    self._note("list")
                    if s3.list_endless_error:
                        self._endless("", 503, b"<Error><Code>SlowDown</Code></Error>")
                        return
                    self._list(query)
                    return
                self._note("get")
                if key in s3.endless_error:
                    self._endless(key, 500, b"<Error><Code>InternalError</Code>"
                                            b"<Message>again and again</Message></Error>")
                    return
                if key in s3.endless_ok:
                    self._endless(key, 200, b"\xff\xd8 not an image ")
                    return
                data = s3.objects.get(key)
                if data is None:
                    self._send(404, b"<Error><Code>NoSuchKey</Code></Error>")
                    return
                headers = [("ETag", '"%s"' % etag_of(data))]
                code = 200
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes="):
                    first, _, last = rng[6:].partition("-")
                    first, last = int(first), min(int(last), len(data) - 1)
                    headers.append(("Content-Range", "bytes %d-%d/%d" % (first, last, len(data))))
                    data = data[first:last + 1]
                    code = 206
                if key in s3.trickle:
                    self.send_response(code)
                    for name, value in headers:
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    try:
                        for i in range(len(data)):
                            self.wfile.write(data[i:i + 1])
                            self.wfile.flush()
                            self._count(key, 1)
                            time.sleep(1)
                    except OSError:
                        pass
                    self.close_connection = True
                    return
                self._count(key, len(data))
                self._send(code, data, headers)

            def _list(self, query):
                prefix = query.get("prefix", [""])[0]
                url_keys = query.get("encoding-type", [""])[0] == "url"
                token = query.get("continuation-token", [""])[0]
                keys = sorted([(k, len(v)) for k, v in s3.objects.items() if k.startswith(prefix)]
                              + list(s3.listed_extra))
                start = int(token) if token.isdigit() else 0
                if s3.loop_token:
                    start, truncated, next_token = 0, True, "again"
                else:
                    truncated = start + s3.page_size < len(keys)
                    next_token = str(start + s3.page_size)
                page = keys[start:start + s3.page_size]
                out = ['<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult '
                       'xmlns="http://s3.amazonaws.com/doc/2006-03-01/">',
                       "<Name>%s</Name>" % s3.bucket,
                       "<Prefix>%s</Prefix>" % escape(prefix),
                       "<KeyCount>%d</KeyCount>" % len(page),
                       "<MaxKeys>%d</MaxKeys>" % s3.page_size,
                       "<IsTruncated>%s</IsTruncated>" % ("true" if truncated else "false")]
                if url_keys:
                    out.append("<EncodingType>url</EncodingType>")
                if truncated:
                    out.append("<NextContinuationToken>%s</NextContinuationToken>" % next_token)
                for key, size in page:
                    # Raw, as S3 answers without encoding-type: a control
                    # character stays as it is (not even valid XML).
                    shown = urllib.parse.quote(key, safe="/") if url_keys else escape(key)
                    data = s3.objects.get(key, key.encode("utf-8", "surrogateescape"))
                    out.append("<Contents><Key>%s</Key><Size>%d</Size><ETag>&quot;%s&quot;"
                               "</ETag></Contents>" % (shown, size, etag_of(data)))
                out.append("</ListBucketResult>")
                self._send(200, "".join(out).encode("utf-8", "surrogateescape"),
                           [("Content-Type", "application/xml")])

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.endpoint = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def put(self, key, data):
        self.objects[key] = data

    def put_tree(self, prefix, root):
        """Every file under `root` as PREFIX/<its relative path>."""
        import os
        for folder, _, files in os.walk(root):
            for name in files:
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, root)
                with open(path, "rb") as f:
                    self.put((prefix + "/" if prefix else "") + rel, f.read())

    def env(self):
        """Credentials for the daemon: never checked here, but recorded."""
        return {"AWS_ACCESS_KEY_ID": "AKIAHOSTILETEST", "AWS_SECRET_ACCESS_KEY":
                "hostile-secret-" + "s" * 24}

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
