"""Views defined outside the project, registered by ``LAMBDALINE_VIEW_MODULES``."""
