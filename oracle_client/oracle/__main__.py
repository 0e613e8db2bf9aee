"""`python -m oracle_client.oracle`: the same as the `nunet-oracle` command."""

from oracle_client.oracle.cli import main

raise SystemExit(main())
