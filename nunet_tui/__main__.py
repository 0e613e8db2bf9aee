import sys

from nunet_tui.cli.main import main

sys.exit(main())
