"""`python -m oracle_client.ledger`: the same as the `nunet-ledger` command."""

from oracle_client.ledger.cli import main

raise SystemExit(main())
