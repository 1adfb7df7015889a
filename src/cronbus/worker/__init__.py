"""The worker: claims runs and executes their attempts."""
