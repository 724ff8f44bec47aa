"""One job of the decode-once benchmark: a process that reads a job's
`next` one whole record at a time until EOF, sleeping DELAY seconds after
each (a paced reader), and prints how many records it read.

    python3 -m bench.scale.reader NEXT RECORD_BYTES DELAY [together]

With `together`, it prints "open" once the stream is open and reads from
the next line on stdin: readers started as processes then begin together.
"""

import os
import sys
import time


def main() -> None:
    path, record, delay = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    fd = os.open(path, os.O_RDONLY)
    if sys.argv[4:] == ["together"]:
        print("open", flush=True)
        sys.stdin.readline()
    n = 0
    while True:
        got = 0
        while got < record:
            chunk = os.read(fd, record - got)
            if not chunk:
                break
            got += len(chunk)
        if got < record:
            break
        n += 1
        if delay:
            time.sleep(delay)
    print(n)


if __name__ == "__main__":
    main()
