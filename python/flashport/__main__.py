"""python -m flashport [--json] [--backend NAME]: what flashport-info prints."""
import argparse
import json
import sys

from . import Error
from ._info import format_info, info


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m flashport",
        description="Shows the flashport version, every backend in auto-selection order and "
                    "whether it is available here (and why not), each device, and each "
                    "backend's kernel variants, as flashport-info does.",
        epilog="Exit status: 0 success; 2 bad command line; 4 the named backend is unknown.")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("--backend", metavar="NAME", help="describe only this backend")
    args = parser.parse_args(argv)
    try:
        data = info(args.backend)
    except Error as e:
        print("python -m flashport: %s" % e, file=sys.stderr)
        return 4
    print(json.dumps(data, indent=2) if args.json else format_info(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
