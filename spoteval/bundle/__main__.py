from spoteval.bundle.unpack import main

raise SystemExit(main())
