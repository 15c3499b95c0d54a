"""The HTTP edge: who is asking (authentication), how often (throttles), and how answers,
errors and byte ranges are written. Lowest layer of the app but the rules in ``domain``."""
