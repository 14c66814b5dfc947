"""File transfer: inbound file channels and outbound file subscribers (overview written by the package owner)."""
