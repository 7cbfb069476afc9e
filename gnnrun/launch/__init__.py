"""Launching ranks: CPU topology, communication backends, rendezvous."""
