"""CPU per image of torchvision's own preparation (PIL decode, Resize,
CenterCrop, PILToTensor), measured in a process of its own so that its
rusage holds nothing else: the component-cost row "PIL" of the throughput
benchmark (scenarios.measure_costs runs it).

    python3 -m bench.throughput.pil_cost IMAGEFOLDER SIZE LIMIT

prints "<CPU ms per image> <minor faults per image>" over the first LIMIT
files (sorted), after 20 of them as a warm-up.
"""

import glob
import os
import resource
import sys

from torchvision import transforms as T
from torchvision.datasets.folder import pil_loader


def cpu() -> tuple[float, int]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_minflt


def main() -> None:
    root, size, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    files = sorted(glob.glob(os.path.join(root, "*", "*")))[:limit]
    tf = T.Compose([T.Resize(size), T.CenterCrop(size), T.PILToTensor()])
    for f in files[:20]:
        tf(pil_loader(f))
    c0, f0 = cpu()
    for f in files:
        tf(pil_loader(f))
    c1, f1 = cpu()
    print(1000 * (c1 - c0) / len(files), (f1 - f0) / len(files))


if __name__ == "__main__":
    main()
