"""Each stage's build (inputs -> asks) and handle (replies -> items and verdicts), without Prefect or the network."""
