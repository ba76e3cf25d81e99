"""Jupyter notebooks: code cells through python/, shell lines through text/, the JSON kept byte for byte; may import python, text and below."""
