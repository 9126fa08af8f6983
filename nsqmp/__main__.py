import sys

from nsqmp.cli import main

sys.exit(main())
