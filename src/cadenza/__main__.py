"""`python -m cadenza ...` (what `torchrun -m cadenza train ...` runs)."""

from cadenza.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
