from netconf.settings import DEFAULTS, parse_settings

__all__ = ["DEFAULTS", "parse_settings"]
