"""`titan-doctor convert`: checkpoint format conversion (DCP / torch.save / HF safetensors /
Meta) on top of titan_train.checkpoint.formats' safe readers and writers. run.py decides and
converts; command.py is the click entry point."""
