"""Rollout metrics and row keys shared by servers, the collector and the viewer (in the base image)."""
