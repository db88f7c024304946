"""The accelerator's ISA (encode/decode) and its functional and timing simulator."""
