"""crown"""
