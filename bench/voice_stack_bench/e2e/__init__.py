"""The end-to-end benchmark against the stock pairing (bench/voice_e2e.py): its servers, both
stacks in one Home Assistant, its phases, the floor and the arithmetic."""
