"""Stack -> the files a deployment target runs (compose, swarm, Kubernetes), no Docker."""
