"""Deployment: hot-deployed service modules, how they import each other, and their history.
"""
