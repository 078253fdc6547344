"""One package per destination (file and csvfile: one module each), the same file roles in each."""
