"""The pool in other tools' formats, each in its own module (imported by its command only):

- k8s: a mig-parted ConfigMap and node labels for NVIDIA's GPU operator (mig-manager)
- migparted: the current layout as a mig-parted v1 config (gpupoolctl's, and strict)
- prometheus: pool and stress metrics in the text exposition format, an atomic textfile
- ansible: ansible-inventory --list JSON with gpupool_ host vars
"""
