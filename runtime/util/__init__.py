"""Small utilities every area uses: green threads, times, bounded JSON, random ids, private data files.
"""
