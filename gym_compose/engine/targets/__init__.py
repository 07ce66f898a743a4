"""The deployment targets: DeployedStack and its implementations."""
