"""The world wing: how a :class:`~warpgeo.world.MeshWorld` is built, one job a module.

``entries`` reads the caller's entries, scenes, names and poses; ``loading`` loads and validates a mesh;
``meshes`` builds its Warp mesh (BVH) and runs the per-face and closed-mesh checks; ``tables`` builds the SDF
kernels' tables (grids, pseudo-normals, plane trees); ``builder`` assembles them, on a background thread for
a CPU world's meshes; ``prepare`` runs the whole build of a world's meshes. ``warpgeo.world`` holds
the world's state and public methods, and ``warpgeo._world_query`` what every world op shares (checks, the
launch).
"""
