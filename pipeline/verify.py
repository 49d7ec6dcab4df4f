"""`python -m pipeline.verify OUTPUT_DIR`: the short name of pipeline/tools/verify.py."""
import sys

from pipeline.tools.verify import main

if __name__ == '__main__':
    sys.exit(main())
