"""champion"""
