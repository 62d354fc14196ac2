"""The broker: `Broker` wires the layers below into a process and runs its lifecycle;
each listener's security is built from the config here."""
