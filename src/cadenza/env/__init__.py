"""The machine: device and precision choice, optional system tools, the environment record, doctor."""

# The precisions training understands; "auto" picks one of the others for the device
# (`cadenza.env.device.resolve_precision`). Here, not in device.py, so the CLI can offer them
# without importing torch.
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
