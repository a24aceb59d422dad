"""The benchmarks' own code, beside the scripts that run it (bench/*.py put this folder on their
import path by being run from it): `e2e/` for bench/voice_e2e.py (and the parts bench/soak.py and
bench/stt_wait_bench.py share), `endpoint/` for bench/endpoint_bench.py, `soak/` for
bench/soak.py, `fuzz/` for bench/wyoming_fuzz.py, `stats` for every benchmark's arithmetic,
`browser_chats` for the chat clients that load llama-server's slots. The real servers they start
come from the shared harness, voice_stack_dev; their tests are in bench/tests."""
