"""The fusion layer, above the core: flat buffers of many small leaves.

``fuse`` (``_fuse.py``) and ``FlatParams`` (``_flat.py``) run an elementwise transformation on a
few concatenated buffers instead of leaf by leaf; ``_elementwise.py`` reads each transformation's
``elementwise`` declaration to decide which may. The core (``steadax._core``) never imports this
package: it declares ``elementwise`` and runs the parameter check this layer registers. A layer, not
a namespace: the public names are re-exported by ``steadax``.
"""
