from exporter.stack.supervisor import main

raise SystemExit(main())
