"""Adapters: the one line a foreign stack's training script adds to report to trainchaos
(progress, checkpoint save/load, the final digest) through ``chaos.probe``. Each module
imports only the probe and its stack, and never changes what the stack trains."""
