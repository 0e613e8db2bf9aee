"""The jobs engine: describe a job (spec), estimate it (tiers), find a provider (matching), and
run it behind one interface (executors), with results, checkpoints and metering."""
