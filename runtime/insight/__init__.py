"""The dashboard's read side: what the overview and services pages read, and the statistics behind them.
"""
