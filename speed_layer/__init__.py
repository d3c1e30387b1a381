"""speed_layer of lambdaline (see docs/architecture.md)."""
