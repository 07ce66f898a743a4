"""Every image build: the base, servers, NeMo Gym runtime, sandboxes, SWE task images."""
