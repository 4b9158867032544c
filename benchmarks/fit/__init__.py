"""How long a fit takes: per stage on a CPU, per trainable mode, and as the records grow."""
