"""Tokens for the trainer: tokenizers and the token stream, corpus readers, prepared token folders, prepare-data. May import config and runtime."""
