"""Training: batches, loops and sweeps over draws (``engine``), SWAG, seeded streams, and fine-tune-and-SWAG."""
