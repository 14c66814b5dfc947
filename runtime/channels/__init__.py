"""REST channels: their definitions and router, and their administration.
"""
