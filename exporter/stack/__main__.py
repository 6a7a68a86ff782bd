from exporter.stack.cli import main

raise SystemExit(main())
