"""The local-model eval: tools.yaml and its agent."""
