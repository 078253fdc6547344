"""One module per destination: its options, its executor write, its driver commit."""
