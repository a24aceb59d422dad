"""The end-of-turn benchmark on the cut-off corpus (bench/endpoint_bench.py): the corpus, Home
Assistant's own hold run on the same audio, and the report's arithmetic."""
