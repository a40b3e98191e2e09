"""The GPU runtimes: loading verified code objects and launching them (ctypes on the vendor's driver).

One module per vendor's driver API (cuda: libcuda; hip: libamdhip64), named by the vendor object
(netra.targets: `Vendor.loader_module`, `Vendor.open_loader`), and what they share: the launch
arguments and `extra` array (launch), device memory, events and graphs (devops). Nothing here is
imported by `import netra` or by the runtime: a loader is imported by whoever launches.
"""
