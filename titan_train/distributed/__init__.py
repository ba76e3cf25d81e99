"""Parallelism applied to a model built on meta: tensor parallel, FSDP2, activation checkpointing, pipeline stages and schedules. May import models, components, config, runtime."""
