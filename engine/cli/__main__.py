import sys

from capeval.engine.cli import main

sys.exit(main())
