"""What the kernel's record path does not need to run: span exporters and the hop trace."""
