"""Object files: declarative YAML objects applied to the database, their checks, and Zato's keys.
"""
