"""Parts of a training step that are not the model: loss, optimizer and LR schedule, metrics sinks, plot. May import config and runtime."""
