"""The kubelet device plugin (API ``v1beta1``): advertises the hardware the exporter monitors.

A separate process (``podres plugin`` / ``python -m podres_exporter.deviceplugin``)
sharing the model, the device-id rules and the hardware sources with the exporter,
never its collectors, poller or exposition:

* ``config``: the resource file (``[[resource]]`` tables and ``[plugin]``);
* ``inventory``: pure; advertised devices per resource, health rules that recover;
* ``allocate``: pure; Allocate content and preferred allocation;
* ``monitor``: the periodic health loop, reading the hardware through the sources;
* ``board``: each resource's latest inventory, shared with its ListAndWatch streams;
* ``servicer``: the ``DevicePlugin`` gRPC service, thin glue;
* ``serving``: a resource's plugin socket: made, proved by a self-dial, retired;
* ``registration``: the ``Register`` call to the kubelet;
* ``kubeletwatch``: a wake-up when ``kubelet.sock`` changes, and the restart counter;
* ``lifecycle``: each resource's loop: serve, register, re-register on kubelet restart;
* ``metrics``: the plugin's own metrics and ``/metrics``, ``/healthz``, ``/readyz``;
* ``main``: settings, ``add_plugin_parser`` / ``run_plugin`` and the composition root.

Only ``servicer``, ``serving`` and ``registration`` import gRPC or the generated protocol code.
"""
