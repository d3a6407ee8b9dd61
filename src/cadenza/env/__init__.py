"""The machine: device and precision choice, optional system tools, the environment record, doctor."""
