"""`python -m oracle_client.oracle_server`: the same as the `nunet-oracle` command."""

from oracle_client.oracle_server.cli import main

raise SystemExit(main())
