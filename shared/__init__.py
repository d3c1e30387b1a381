"""The domain of lambdaline, shared by the speed and batch layers.

Event schemas, validation and dead-letter rules, settings, and (as the layers
arrive) the view definitions and the merge rule. It imports no layer.
"""
