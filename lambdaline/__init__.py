"""The lambdaline application: the ``lambdaline`` command and the local platform.

It wires the layers together for one machine: the embedded Kafka broker, topic
creation, the seeded event generator and the command line. The layers never
import it.
"""
